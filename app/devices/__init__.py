"""Which devices of the cluster a DeviceClass + selectors match, fast enough to ask per request.

Not CEL itself (that is :mod:`app.cel`: the language, its engines and cost), but what is built
on it to answer the question for every ResourceSlice at once: the slices' devices converted once
per version (:mod:`~app.devices.store`), their values numbered as columns
(:mod:`~app.devices.columns`), slices alike grouped (:mod:`~app.devices.groups`), an outcome per
group and selector set memoized (:mod:`~app.devices.shapes`, :mod:`~app.devices.index`), and
string comparisons answered without CEL (:mod:`~app.devices.literals`).
"""
