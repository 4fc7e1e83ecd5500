-- One page of a thread-scoped `list`, with the small part of each tuple. `mode` is
-- `byns` (one namespace), `byid` (all namespaces) or `mi` (metadata tokens, intersected).
-- Arguments: `ListArgs` in scripts.rs.
local ttl, refresh, want, budget, lo, hi, nscheck, mode, nsp =
  ARGV[1], ARGV[2] == '1', tonumber(ARGV[3]), tonumber(ARGV[4]), ARGV[5], ARGV[6], ARGV[7],
  ARGV[8], ARGV[9]
local first_token = 10
local cands, suffix = {}, ''
if mode == 'byns' then
  cands = {{MI, BYNS .. nsp}}
  suffix = nsp
elseif mode == 'byid' then
  cands = {{MI, BYID}}
else
  for i = first_token, #ARGV do cands[#cands + 1] = {MI, ARGV[i] .. '\0'} end
end
local refs, last, done = scan(cands, lo, hi, nscheck, 1, want, budget)
local tuples = {}
for _, r in ipairs(refs) do
  local t = load_meta(r .. suffix)
  if t then tuples[#tuples + 1] = t end
end
if refresh and #tuples > 0 then touch(ttl) end
return {tuples, last, done and 1 or 0}
