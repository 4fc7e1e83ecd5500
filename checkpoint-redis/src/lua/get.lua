-- `get_tuple`: the whole tuple, or its small part only (see `load_meta`), of one
-- checkpoint or of the namespace's latest. Arguments: `GetArgs` in scripts.rs.
local ttl, refresh, nsp, idp, meta_only = ARGV[1], ARGV[2] == '1', ARGV[3], ARGV[4], ARGV[5] == '1'
if idp == '' then
  idp = head_idp(nsp)
  if not idp then return false end
end
local t
if meta_only then t = load_meta(idp .. nsp) else t = load_tuple(idp .. nsp) end
if t and refresh then touch(ttl) end
return t or false
