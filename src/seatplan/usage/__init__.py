"""Usage: what the gateway's spend logs say about each seat."""
