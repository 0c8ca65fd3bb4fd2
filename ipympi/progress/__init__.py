"""The progress engine of one rank: the core driven with I/O.

Sockets (Unix datagrams on one host, signed zmq tcp frames between hosts, single-copy
large buffers), the engine that feeds frames to the matching core and waits, the
in-flight state of each transfer, the progress thread that moves messages and answers
the launcher's queries while the user computes, and the tracing of messages. It imports
the core only; the MPI objects above call into it.
"""
