-- Ledger abandon. KEYS: the claim key. Arguments: `ClaimArgs` in scripts.rs.
local token = tonumber(ARGV[1])
local s = redis.call('HMGET', KEYS[1], 't', 's')
if tonumber(s[1]) == token and s[2] == 'p' then
  redis.call('HSET', KEYS[1], 's', 'a')
end
return {'OK'}
