"""The network front of ``dpsql serve``: a PostgreSQL wire-protocol server that untrusted analysts reach with
ordinary PostgreSQL clients.

:mod:`dpsql.server.pgwire` speaks the protocol (startup, TLS, SCRAM-SHA-256 authentication, simple and extended
query) and knows nothing of dpsql's engine: it hands each statement's text to a ``Session`` that the server's
owner supplies. :mod:`dpsql.server.scram` is the server side of SCRAM-SHA-256 and its stored verifiers;
:mod:`dpsql.server.wiretypes` encodes values and bound parameters, :mod:`dpsql.server.sqltext` finds the ``$n``
parameters in a statement, and :mod:`dpsql.server.pgerror` is the error a session raises for the client.
"""
