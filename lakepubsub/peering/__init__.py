"""Peering: the API processes of one lake, which of them owns what, and the calls
between them."""
