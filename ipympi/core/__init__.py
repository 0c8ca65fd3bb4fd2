"""The sans-I/O core: what every layer above speaks, with no sockets, threads or clocks.

Point-to-point matching, the wire format of frames, the control protocol's messages,
collective algorithms and reductions as schedules of rounds, typemaps and the conversions
they describe, context ids, error classes and the handle object model. Nothing here
imports pyzmq or anything of ipympi above it, so all of it is unit-tested without processes.
"""
