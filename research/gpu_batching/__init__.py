"""Batching on a GPU: llama-server's continuous batching against the adapter, the bisect of a
model load that failed on the device, and the kit that carries both to a GPU machine without a
package registry."""
