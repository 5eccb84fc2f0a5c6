"""Worked examples of batch consumers (``lakepubsub jobs run batch-consume --transform …``)."""
