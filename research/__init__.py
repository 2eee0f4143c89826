"""Studies behind the product's choices: runnable, with their reports, but not part of the
product, `make test`'s product checks or `make bench`."""
