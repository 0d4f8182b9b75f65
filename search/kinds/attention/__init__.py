"""Attention (forward) as a problem kind: the spec (:mod:`.spec`); its library plan, tiers and
tuners register here as the kind's search side."""
