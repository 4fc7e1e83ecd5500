-- Key bindings of thread scripts: `KEYS[1..7]` are the thread's keys, `KEYS[8..9]` the
-- global keys (the index, and the Cluster's entry times, unused here) when the script
-- maintains the index inline (single node). `TOUCH` gets only `KEYS[1..6]` (`CP` … `OPT`).
--
-- The thread's sorted index `MI` holds three kinds of members, told apart by their first
-- byte (metadata tokens are printable, so they never start with `\1` or `\2`):
-- `\1 tref` (every checkpoint by id), `\2 esc(ns) esc(id)` (by namespace, then id) and
-- `token \0 tref` (metadata). The global `GMI` likewise holds `\1 gref pack(tokens)` and
-- `token \0 gref`, and `\3 esc(thread) cp_key` per thread. One `ZADD` per index keeps a
-- put cheap.
local CP, BL, WI, WV, MI, OPT, LEASE =
  KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7]
local GMI = KEYS[8]
local INLINE = GMI ~= nil
local DATA = {CP, BL, WI, WV, MI}
