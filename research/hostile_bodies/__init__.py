"""Request bodies that were slow to tokenize, timed against the adapter."""
