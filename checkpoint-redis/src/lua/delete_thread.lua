-- `delete_thread`: every key of the thread. Arguments: `ThreadArgs` in scripts.rs.
local ethread = ARGV[1]
wipe(ethread)
redis.call('DEL', OPT)
return {'OK', GREM}
