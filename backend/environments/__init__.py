"""OpenEnv from the client side: the wire protocol, the adapter for TRL, episodes, probes and the server launcher."""
