"""What llama-cpp-python's ctypes bindings declare against what the engine's llama.h compiles to.

The bindings are Python: nothing checks them against the C library they load, and a struct or
signature that drifted corrupts memory instead of failing. So, for the engine the recipe built
(container/llama_build.py):
- **structs**: each field's name and order from llama.h (parsed by libclang), its offset and
  size and the struct's size from a small C program compiled by gcc against the same tree
  (what the library itself was compiled with), against the ctypes Structure's fields;
- **functions**: each parameter's and the result's ABI class (signed or unsigned integer of a
  size, floating point of a size, pointer, struct by value, void) from llama.h, against the
  ctypes function's `argtypes` and `restype`.
A difference is a line of text naming the struct or function; none means the bindings match.
"""

from __future__ import annotations

import ast
import ctypes
import subprocess
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import clang.cindex as cx

# The structs the adapter passes to llama.cpp, by value or through a pointer it fills.
STRUCTS = (
    "llama_model_params",
    "llama_context_params",
    "llama_batch",
    "llama_sampler_chain_params",
)

# Names the bindings keep for what llama.h now calls otherwise: llama_log_set takes a
# ggml_log_callback since llama.h dropped its own typedef.
ALIASES = {"llama_log_callback": "ggml_log_callback"}

_SIGNED = {
    cx.TypeKind.CHAR_S,
    cx.TypeKind.SCHAR,
    cx.TypeKind.SHORT,
    cx.TypeKind.INT,
    cx.TypeKind.LONG,
    cx.TypeKind.LONGLONG,
}
_UNSIGNED = {
    cx.TypeKind.CHAR_U,
    cx.TypeKind.UCHAR,
    cx.TypeKind.USHORT,
    cx.TypeKind.UINT,
    cx.TypeKind.ULONG,
    cx.TypeKind.ULONGLONG,
}
_FLOATING = {cx.TypeKind.FLOAT, cx.TypeKind.DOUBLE, cx.TypeKind.LONGDOUBLE}
_POINTERS = {cx.TypeKind.POINTER, cx.TypeKind.INCOMPLETEARRAY, cx.TypeKind.CONSTANTARRAY}

_CTYPES_SIGNED = (
    ctypes.c_byte,
    ctypes.c_short,
    ctypes.c_int,
    ctypes.c_long,
    ctypes.c_longlong,
    ctypes.c_int8,
    ctypes.c_int16,
    ctypes.c_int32,
    ctypes.c_int64,
    ctypes.c_char,  # C's char is signed on x86; ctypes reads it as one byte
)
_CTYPES_UNSIGNED = (
    ctypes.c_ubyte,
    ctypes.c_ushort,
    ctypes.c_uint,
    ctypes.c_ulong,
    ctypes.c_ulonglong,
    ctypes.c_uint8,
    ctypes.c_uint16,
    ctypes.c_uint32,
    ctypes.c_uint64,
    ctypes.c_size_t,
)
_CTYPES_POINTERS = (ctypes.c_void_p, ctypes.c_char_p, ctypes.c_wchar_p, ctypes._Pointer)


@dataclass(frozen=True)
class Abi:
    """How a value crosses the call: its class and size in bytes."""

    kind: str  # "int", "uint", "float", "bool", "pointer", "struct <name>", "void"
    size: int

    def __str__(self) -> str:
        return f"{self.kind}/{self.size}"


@dataclass(frozen=True)
class Field:
    name: str
    offset: int
    size: int
    abi: Abi


@dataclass(frozen=True)
class Layout:
    size: int
    fields: tuple[Field, ...]


@dataclass(frozen=True)
class Header:
    """llama.h as the compiler reads it: struct fields and function signatures."""

    fields: dict[str, tuple[tuple[str, Abi], ...]]
    functions: dict[str, tuple[Abi, tuple[Abi, ...]]]  # functions and callback typedefs


def include_dirs(tree: Path) -> list[Path]:
    return [tree / "include", tree / "ggml" / "include"]


def parse_header(tree: Path, header: Path | None = None) -> Header:
    """libclang's reading of llama.h (or a copy of it in `header`) with the tree's includes."""
    header = header or tree / "include" / "llama.h"
    index = cx.Index.create()
    # libclang's wheel carries no compiler headers (stddef.h, stdbool.h): gcc's serve, the
    # compiler that built the library.
    builtin = subprocess.run(
        ["gcc", "-print-file-name=include"], check=True, capture_output=True, text=True
    ).stdout.strip()
    args = ["-x", "c", "-std=c11", "-isystem", builtin, *(f"-I{d}" for d in include_dirs(tree))]
    unit = index.parse(str(header), args=args)
    errors = [d for d in unit.diagnostics if d.severity >= cx.Diagnostic.Error]
    if errors:
        raise ValueError(f"libclang cannot read {header}: {errors[0]}")
    fields: dict[str, tuple[tuple[str, Abi], ...]] = {}
    functions: dict[str, tuple[Abi, tuple[Abi, ...]]] = {}
    for cursor in unit.cursor.get_children():
        if cursor.location.file is None or not _inside(
            Path(cursor.location.file.name), tree, header
        ):
            continue  # the C library's own declarations
        if cursor.kind == cx.CursorKind.STRUCT_DECL and cursor.is_definition():
            fields[cursor.spelling] = tuple(
                (f.spelling, _header_abi(f.type)) for f in cursor.type.get_fields()
            )
        elif cursor.kind == cx.CursorKind.FUNCTION_DECL:
            params = tuple(_header_abi(a.type) for a in cursor.get_arguments())
            functions[cursor.spelling] = (_header_abi(cursor.result_type), params)
        elif cursor.kind == cx.CursorKind.TYPEDEF_DECL:
            # A callback type (ggml_abort_callback, ggml_log_callback): the adapter hands
            # llama.cpp Python functions of it, called with these arguments.
            target = cursor.underlying_typedef_type.get_canonical()
            if target.kind == cx.TypeKind.POINTER:
                proto = target.get_pointee()
                if proto.kind == cx.TypeKind.FUNCTIONPROTO:
                    params = tuple(_header_abi(a) for a in proto.argument_types())
                    functions[cursor.spelling] = (_header_abi(proto.get_result()), params)
    return Header(fields, functions)


def _inside(path: Path, tree: Path, header: Path) -> bool:
    return path == header or path.is_relative_to(tree)


def _header_abi(type_: cx.Type) -> Abi:
    canonical = type_.get_canonical()
    kind = canonical.kind
    if kind == cx.TypeKind.VOID:
        return Abi("void", 0)
    size = canonical.get_size()
    if kind == cx.TypeKind.BOOL:
        return Abi("bool", size)
    if kind in _SIGNED or kind == cx.TypeKind.ENUM:
        # An enum crosses as an int of its size; ctypes has no enums, the bindings use c_int.
        return Abi("int", size)
    if kind in _UNSIGNED:
        return Abi("uint", size)
    if kind in _FLOATING:
        return Abi("float", size)
    if kind in _POINTERS or kind == cx.TypeKind.FUNCTIONPROTO:
        return Abi("pointer", 8)
    if kind == cx.TypeKind.RECORD:
        return Abi(f"struct {canonical.get_declaration().spelling}", size)
    raise ValueError(f"no ABI class for {type_.spelling} ({kind})")


def ctypes_abi(type_: object) -> Abi:
    """The ABI class of a ctypes type as the bindings declare it (None: void)."""
    if type_ is None:
        return Abi("void", 0)
    assert isinstance(type_, type)
    if issubclass(type_, ctypes.c_bool):
        return Abi("bool", ctypes.sizeof(type_))
    if issubclass(type_, _CTYPES_SIGNED):
        return Abi("int", ctypes.sizeof(type_))
    if issubclass(type_, _CTYPES_UNSIGNED):
        return Abi("uint", ctypes.sizeof(type_))
    if issubclass(type_, (ctypes.c_float, ctypes.c_double)):
        return Abi("float", ctypes.sizeof(type_))
    if issubclass(type_, _CTYPES_POINTERS) or _is_function_pointer(type_):
        return Abi("pointer", 8)
    if issubclass(type_, ctypes.Structure):
        return Abi(f"struct {type_.__name__}", ctypes.sizeof(type_))
    if issubclass(type_, ctypes.Array):
        return Abi("pointer", 8)  # an array parameter decays to a pointer
    raise ValueError(f"no ABI class for ctypes type {type_!r}")


def _is_function_pointer(type_: type) -> bool:
    return hasattr(type_, "_argtypes_") and hasattr(type_, "_restype_")


def compiled_layouts(
    tree: Path, header: Header, structs: Iterable[str] = STRUCTS
) -> dict[str, Layout]:
    """Each struct's size and its fields' offsets and sizes, printed by a C program gcc compiles
    against the tree's headers (the fields named by the header's own declaration)."""
    lines = ["#include <stddef.h>", "#include <stdio.h>", '#include "llama.h"', "int main(void) {"]
    for struct in structs:
        lines.append(f'  printf("{struct} %zu\\n", sizeof(struct {struct}));')
        for name, _ in header.fields[struct]:
            member = f"((struct {struct} *)0)->{name}"
            lines.append(
                f'  printf("{struct}.{name} %zu %zu\\n", '
                f"offsetof(struct {struct}, {name}), sizeof({member}));"
            )
    lines += ["  return 0;", "}"]
    with tempfile.TemporaryDirectory() as scratch:
        source = Path(scratch) / "layouts.c"
        binary = Path(scratch) / "layouts"
        source.write_text("\n".join(lines) + "\n")
        includes = [f"-I{d}" for d in include_dirs(tree)]
        subprocess.run(["gcc", "-std=c11", *includes, str(source), "-o", str(binary)], check=True)
        printed = subprocess.run([str(binary)], check=True, capture_output=True, text=True).stdout
    numbers = {
        name: [int(n) for n in rest]
        for name, *rest in (line.split() for line in printed.splitlines())
    }
    layouts = {}
    for struct in structs:
        fields = tuple(
            Field(name, *numbers[f"{struct}.{name}"], abi) for name, abi in header.fields[struct]
        )
        layouts[struct] = Layout(numbers[struct][0], fields)
    return layouts


def bindings_layout(structure: type[ctypes.Structure]) -> Layout:
    fields = []
    for name, type_, *_ in structure._fields_:
        described = getattr(structure, name)
        fields.append(Field(name, described.offset, described.size, ctypes_abi(type_)))
    return Layout(ctypes.sizeof(structure), tuple(fields))


def struct_differences(compiled: dict[str, Layout], bindings: object) -> list[str]:
    """Every way a ctypes Structure in `bindings` differs from the compiled struct."""
    found = []
    for struct, layout in compiled.items():
        declared = bindings_layout(getattr(bindings, struct))
        if declared.size != layout.size:
            found.append(f"struct {struct}: {layout.size} bytes compiled, {declared.size} declared")
        names = [f.name for f in layout.fields]
        declared_names = [f.name for f in declared.fields]
        if names != declared_names:
            found.append(f"struct {struct}: fields {names} compiled, {declared_names} declared")
            continue
        for field, mine in zip(layout.fields, declared.fields, strict=True):
            if (field.offset, field.size, field.abi) != (mine.offset, mine.size, mine.abi):
                found.append(
                    f"struct {struct}.{field.name}: offset {field.offset} size {field.size} "
                    f"{field.abi} compiled, offset {mine.offset} size {mine.size} {mine.abi} "
                    "declared"
                )
    return found


def function_differences(header: Header, bindings: object, names: Iterable[str]) -> list[str]:
    """Every function in `names` whose declared result or parameters cross differently."""
    found = []
    for name in sorted(names):
        declared = getattr(bindings, name)
        name = ALIASES.get(name, name)
        if name not in header.functions:
            found.append(f"{name}: declared by the bindings, absent from llama.h")
            continue
        result, params = header.functions[name]
        declared_result, declared_params = _declared_signature(declared)
        if declared_result != result:
            found.append(f"{name}: returns {result} in llama.h, {declared_result} declared")
        if declared_params != params:
            shown = ", ".join(map(str, params))
            mine = ", ".join(map(str, declared_params))
            found.append(f"{name}: takes ({shown}) in llama.h, ({mine}) declared")
    return found


def _declared_signature(declared: object) -> tuple[Abi, tuple[Abi, ...]]:
    """A ctypes function's, or a CFUNCTYPE callback type's, result and parameters."""
    if isinstance(declared, type):
        restype, argtypes = declared._restype_, declared._argtypes_  # type: ignore[attr-defined]
    else:
        restype, argtypes = declared.restype, declared.argtypes  # type: ignore[attr-defined]
    return ctypes_abi(restype), tuple(ctypes_abi(t) for t in argtypes or ())


def called_functions(sources: Iterable[Path], bindings: object) -> set[str]:
    """The bindings' functions the sources call, and callback types they use, as
    `llama_cpp.<name>`."""
    names = set()
    for source in sources:
        for node in ast.walk(ast.parse(source.read_text())):
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.value.id == "llama_cpp"
                and _is_function(getattr(bindings, node.attr, None))
            ):
                names.add(node.attr)
    return names


def _is_function(declared: object) -> bool:
    if isinstance(declared, type):
        return _is_function_pointer(declared)
    return hasattr(declared, "argtypes") and hasattr(declared, "restype")
