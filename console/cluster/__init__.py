"""Campaigns across GPUs and hosts on Ray (docs/cluster.md).

The console process connects to a Ray cluster (connect.py), checks its shape against the plan
(shape.py), groups the cells a paired comparison compares (groups.py), runs each group as a Ray
task that reserves one GPU (engine_adapters/cluster.py on the node) and stores what the tasks
stream back (recorder.py); it stays the store's only writer. dispatch.py ties these together for
`campaign run --cluster`, scoring.py shards `campaign score --cluster` across GPU actors.
"""
