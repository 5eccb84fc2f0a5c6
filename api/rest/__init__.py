"""The REST door: Pub/Sub v1 over HTTP/JSON (the resource routes, the publish
fast path, the HTTP middleware and ``/docs``)."""
