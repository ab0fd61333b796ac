"""Host side of every operator: checks in CANN order, plans, the two-phase entry points."""
