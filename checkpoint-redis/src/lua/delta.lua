-- `delta_channel_history`: the walk up the parent links of one namespace for the channels
-- whose walk is still open, in one script. Arguments: `DeltaArgs` in scripts/args.rs:
-- after the TTL, the refresh flag, esc(ns) and esc(id) (empty: the latest), one pair per
-- channel: its name and esc(name).
--
-- Reply: a flat list of entries, newest checkpoint first: `'w', depth, member, value` per
-- pending write of an open channel (the members of a checkpoint come in index order, which
-- is (task_path, task_id, idx) order) and `'s', k, value` for the seed of channel k.
local ttl, refresh, nsp, idp = ARGV[1], ARGV[2] == '1', ARGV[3], ARGV[4]
local names, escs = {}, {}
for i = 5, #ARGV, 2 do
  names[#names + 1] = ARGV[i]
  escs[#escs + 1] = ARGV[i + 1]
end
if idp == '' then
  idp = head_idp(nsp)
  if not idp then return {} end
end
local rec = redis.call('HGET', CP, idp .. nsp)
if not rec then return {} end
local open, nopen = {}, #names
for k = 1, #names do open[k] = true end
local _, _, parent = record_parts(rec)
local child = idp
local out = {}
local depth = 0
-- Ids only decrease along parent links (`esc` keeps their order): the walk ends even on
-- damaged records.
while parent ~= '' and nopen > 0 and parent < child do
  local tref = parent .. nsp
  rec = redis.call('HGET', CP, tref)
  if not rec then break end
  local fields, _, grandparent = record_parts(rec)
  local ws = redis.call('ZRANGEBYLEX', WI, '[' .. tref, '(' .. tref .. HI)
  if #ws > 0 then
    local wv = chunked('HMGET', WV, write_uniqs(tref, ws))
    for i, m in ipairs(ws) do
      local v = wv[i]
      if v then
        local _, j = netstr(v, 1)
        local channel = netstr(v, j)
        for k = 1, #names do
          if open[k] and names[k] == channel then
            out[#out + 1] = 'w'
            out[#out + 1] = depth
            out[#out + 1] = m
            out[#out + 1] = v
            break
          end
        end
      end
    end
  end
  -- A channel stored here (a value, or a chunked value's manifest) ends its walk.
  local inline = nil
  for k = 1, #names do
    if open[k] then
      local prefix = nsp .. escs[k]
      for _, f in ipairs(fields) do
        if string.sub(f, 1, #prefix) == prefix then
          local v = redis.call('HGET', BL, f)
          if not v then
            if not inline then
              inline = {}
              local ms = record_manifests(rec)
              for i = 1, #ms, 2 do inline[ms[i]] = ms[i + 1] end
            end
            local m = inline[f] or redis.call('HGET', BL, MANIFEST .. f)
            if m then v = assemble(m) end
          end
          if v and v ~= 'X' then
            out[#out + 1] = 's'
            out[#out + 1] = k
            out[#out + 1] = v
            open[k] = false
            nopen = nopen - 1
          end
          break
        end
      end
    end
  end
  child = parent
  parent = grandparent
  depth = depth + 1
end
if refresh then touch(ttl) end
return out
