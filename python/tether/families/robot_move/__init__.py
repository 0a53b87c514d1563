"""The `physical_ai.robot_move` family: multi-joint moves of a real robot.

`request` is the request and its validation, `family` the runtime family and adapter glue,
`journal` the move's records in the provider operations journal (`tether.operations`), and
`operator` the family's side of an operator decision (fresh read-back, comparison, re-issue
proof).
"""
