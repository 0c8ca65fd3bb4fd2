"""Collective operations: intracommunicator, intercommunicator and their buffer forms.

``runner`` runs a schedule of rounds (``core.algorithms``, ``core.reductions``) in the
blocking, nonblocking or persistent mode; ``fast`` is the straight path of the most
frequent small blocking collectives.
"""
