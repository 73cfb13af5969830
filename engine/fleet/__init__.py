"""Many engines behind one router: the replicas, the fleet clock, the routers and their why (see fleet.py)."""
