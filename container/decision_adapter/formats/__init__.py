"""Wire formats: each a `base.WireFormat` with its request schema, how a request becomes the
service's questions or chat, how results are encoded, and its error body."""
