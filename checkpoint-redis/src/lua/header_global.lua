-- Key bindings of global-index scripts.
local CP, BL, WI, WV, MI, OPT, LEASE
local GMI = KEYS[1]
local INLINE = true
local DATA = {}
