"""Starting and watching the ranks of a job: ``python -m ipympi.run`` and its agents.

The launcher (one host), the host agents and hosts of a job on several machines, output
forwarding, helper processes driven over JSON lines, and the stuck-job rule shared with
the notebook's controller. It needs no MPI: it starts processes and talks the control
protocol of ``core.control`` with them.
"""
