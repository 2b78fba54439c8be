"""Launchers: start the services of a run (locally, or as Ray actors) and supervise them."""
