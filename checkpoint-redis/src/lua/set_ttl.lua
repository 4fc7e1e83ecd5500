-- Per-thread TTL: `pin` (never expire), `ms` (expire after `ms`) or `default` (the
-- saver's default, `default_ms`; 0 = none). Arguments: `SetTtlArgs` in scripts.rs.
local mode, ms, default = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
if mode == 'pin' then
  redis.call('HSET', OPT, 't', '0')
  for _, k in ipairs(DATA) do redis.call('PERSIST', k) end
  redis.call('PERSIST', OPT)
elseif mode == 'ms' then
  redis.call('HSET', OPT, 't', fmt(ms))
  for _, k in ipairs(DATA) do redis.call('PEXPIRE', k, ms) end
  redis.call('PEXPIRE', OPT, ms)
else
  redis.call('DEL', OPT)
  for _, k in ipairs(DATA) do
    if default > 0 then redis.call('PEXPIRE', k, default) else redis.call('PERSIST', k) end
  end
end
return {'OK'}
