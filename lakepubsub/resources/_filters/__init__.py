"""The filter language's parts: syntax tree, scanner, parsers, evaluation.

``lakepubsub.resources.filters`` is the public surface; nothing else imports from here.
"""
