"""The replay buffer's server side: the Flight service, its durable store, `areal-mem buffer serve`, a launcher."""
