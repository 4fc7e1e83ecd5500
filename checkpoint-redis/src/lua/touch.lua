-- The TTL refresh of a single-node unconditional put, which writes everything else with
-- plain commands in the same `MULTI`/`EXEC`. KEYS: the thread's data keys and `OPT`
-- (`CP` … `OPT`). Arguments: `TouchArgs` in scripts.rs.
local ttl = ARGV[1]
touch(ttl)
return 1
