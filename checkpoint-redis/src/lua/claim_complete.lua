-- Ledger completion. KEYS: the claim key. Arguments: `ClaimArgs` in scripts.rs.
local token, outcome = tonumber(ARGV[1]), ARGV[2]
local s = redis.call('HMGET', KEYS[1], 't', 's')
local tok, st = tonumber(s[1]), s[2]
if tok and tok == token then
  if st == 'p' then
    redis.call('HSET', KEYS[1], 's', 'c', 'o', outcome)
    redis.call('HDEL', KEYS[1], 'e')
    return {'OK'}
  elseif st == 'c' then
    return {'OK'}
  end
  return {'ABANDONED', fmt(tok)}
end
return {'FENCE', fmt(tok or 0)}
