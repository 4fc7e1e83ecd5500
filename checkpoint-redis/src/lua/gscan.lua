-- One page of global references, newest first: `all`, or `mi` (metadata tokens,
-- intersected). Arguments: `GscanArgs` in scripts.rs.
local want, budget, lo, hi, nscheck, mode =
  tonumber(ARGV[1]), tonumber(ARGV[2]), ARGV[3], ARGV[4], ARGV[5], ARGV[6]
local first_token = 7
local cands = {}
if mode == 'all' then
  cands = {{GMI, BYID, 3}}
else
  for i = first_token, #ARGV do cands[#cands + 1] = {GMI, ARGV[i] .. '\0'} end
end
local refs, last, done = scan(cands, lo, hi, nscheck, 2, want, budget)
return {refs, last, done and 1 or 0}
