-- `delete_thread`: every key of the thread. Arguments: `ThreadArgs` in scripts.rs.
local ethread = ARGV[1]
wipe(ethread)
redis.call('DEL', OPT)
-- The thread's entry (on a Cluster, the next thread listing removes it).
if INLINE then redis.call('ZREM', GMI, '\3' .. ethread .. CP) end
return {'OK', GREM}
