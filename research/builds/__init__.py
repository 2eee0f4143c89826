"""The same decision on each way of building llama.cpp, on one machine."""
