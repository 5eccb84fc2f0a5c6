"""The filter language's parts: syntax tree, scanner, parsers, evaluation.

``lakepubsub.filters`` is the public surface; nothing else imports from here.
"""
