-- Read one lock's state in one consistent snapshot (read-only): `snapshot` in common.lua, which
-- acquire.lua also returns when a waiter's status line is due.
return snapshot()
