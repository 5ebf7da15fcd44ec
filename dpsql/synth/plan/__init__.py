"""Each synthesis method's plan, made before anything is charged: the request validated, the
spend split, the model sized and the run's time priced from public values alone (the schema, the
workload, the options), refused up front when it cannot fit. A plan is a
:class:`~dpsql.synth.plan.request.Run`, which :func:`dpsql.synth.synthesize.synthesize` carries
out once the whole cost is checked against the budget.
"""
