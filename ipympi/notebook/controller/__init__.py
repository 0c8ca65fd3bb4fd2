"""The controller side of a notebook session: engines' cluster, output rendering,
target selection.
"""
