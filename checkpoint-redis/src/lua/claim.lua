-- Ledger claim. KEYS: the claim key. Arguments: `ClaimArgs` in scripts.rs.
local ttl_ms = tonumber(ARGV[1])
local now = now_ms()
local s = redis.call('HMGET', KEYS[1], 't', 's', 'e', 'o')
local tok, st, exp = tonumber(s[1]), s[2], tonumber(s[3])
if st == 'c' then return {'C', s[4]} end
if st == 'p' and exp and exp > now then return {'P', fmt(exp - now)} end
local token = (tok or 0) + 1
redis.call('HSET', KEYS[1], 't', fmt(token), 's', 'p', 'e', fmt(now + ttl_ms))
redis.call('HDEL', KEYS[1], 'o')
return {'A', fmt(token)}
