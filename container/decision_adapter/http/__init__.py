"""The HTTP layer: routes, bodies, connections and draining at shutdown. It reaches the model
only through the service layer."""
