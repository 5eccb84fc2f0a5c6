"""The doors: Google Cloud Pub/Sub v1 over the lakepubsub engine.

The shared mapping sits at this level (``models``, ``convert``, ``errors``,
``methods``, ``deps``); the REST door is ``api.rest``, the gRPC door ``api.grpc``,
authentication and authorization for both ``api.auth``, the console ``api.console``,
and ``api.app`` puts them together.
"""
