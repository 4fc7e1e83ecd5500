-- Key bindings of global-index scripts.
local CP, BL, WI, WV, MI, OPT, LEASE
local GMI, GTS = KEYS[1], KEYS[2]
local INLINE = true
local DATA = {}
