"""Delivery: ack ids, lease state and its planner, the lease table and the dispatcher."""
