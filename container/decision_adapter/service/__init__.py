"""The service layer: the model's two operations (score, chat), admission to the one model
thread, and the served model's identity."""
