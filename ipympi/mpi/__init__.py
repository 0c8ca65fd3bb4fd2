"""The MPI standard's objects, one module per object or chapter: what ``ipympi.MPI`` exports.

Communicators (intra, inter, topologies), groups, datatypes, operations, requests,
statuses, messages, error handling, attributes, info, environment management
(``runtime``) and the collectives (``coll/``). They check arguments, route errors
through error handlers and hand the work to the progress engine below.
"""
