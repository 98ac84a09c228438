"""Stage schedules: one per stage class and target kind, each a set of knobs and a lowering to
loop IR (the interface is `stage.Schedule`; `backend.schedule_for` finds a stage's).

Each kind's table lives in its folder (`targets/<kind>/schedule/`). What every target shares
stays here: the interface and loop-building pieces (`stage`), the contraction plan (`plan`)
and vectorization of index expressions (`vectorize`).
"""
