class PackagingError(Exception):
    """Packaging refused; the message is one line meant for the operator."""


class SpecError(PackagingError):
    """The spec is unknown or invalid."""


class ChecksumMismatch(PackagingError):
    """A file's size or SHA-256 differs from the pinned value."""
