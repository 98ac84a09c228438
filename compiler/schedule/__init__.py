"""Stage schedules: per stage class and target kind, a list of templates, each a set of knobs
and a lowering to loop IR (the interface is `stage.Schedule`), joined for a stage by `union`
(`backend.schedule_for` finds a stage's).

Each kind's templates live in its folder (`targets/<kind>/schedule/`, or `targets/gpu/` for
those every GPU kind shares). What every target shares stays here: the interface and
loop-building pieces (`stage`), the union of a class's templates (`union`), the contraction
plan (`plan`) and vectorization of index expressions (`vectorize`).
"""
