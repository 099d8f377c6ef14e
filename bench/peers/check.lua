-- bench/peers/check.lua — wrk's requests for make bench-peers: one check
-- with the platform's two limits per request, as quotad's POST /v1/check
-- (PEERS_API=quota) or envoy ratelimit's POST /json (PEERS_API=envoy).
-- Ordinary traffic draws app (1,000), user and IP (100,000 each) and
-- interface (50) uniformly; PEERS_FLOOD=0.9 sends 90 % of the calls from
-- 10 fixed identities (past their limits after their first 1,000 calls),
-- each its own app and IP; PEERS_FLOOD_SHARED=1 makes them 10 users of one
-- app behind one IP, past both limits (1,000 a user, 10,000 the app's IP).
--
-- Every request is drawn and formatted ahead, in init(): PEERS_REQUESTS
-- (default 100,000) per wrk thread, which request() then hands out in
-- turn. Formatting each request as it is sent took a share of the two
-- shared cores away from the servers under test (and the same share from
-- each, which compresses every ratio between them). 100,000 a thread,
-- because a 10 s turn sends a few hundred thousand requests over both
-- threads: each ordinary key is then sent about once or twice a turn
-- rather than once (a request repeated within a turn may find its counter
-- and analytics row already there); more would lengthen init(), during
-- which wrk's first thread already sends while its second is made, and
-- grow wrk's memory (a table of ~25 MB a thread).
local api = os.getenv("PEERS_API") or "quota"
local flood = tonumber(os.getenv("PEERS_FLOOD") or "0")
local shared = os.getenv("PEERS_FLOOD_SHARED") == "1"
local count = tonumber(os.getenv("PEERS_REQUESTS") or "100000")
local counter = 0

function setup(thread)
	counter = counter + 1
	thread:set("id", counter)
end

local function ip(n)
	return string.format("10.%d.%d.%d", math.floor(n / 65536) % 256, math.floor(n / 256) % 256, n % 256)
end

-- draw is one request, drawn as every request is.
local function draw()
	local app, user, addr, iface
	if flood > 0 and math.random() < flood then
		local f = math.random(0, 9)
		app, user, addr, iface = "flood-" .. f, "flood-" .. f, ip(f), "iface-0"
		if shared then
			app, addr = "flood-shared", ip(0)
		end
	else
		app = "app-" .. math.random(0, 999)
		user = "user-" .. math.random(0, 99999)
		addr = ip(math.random(0, 99999))
		iface = "iface-" .. math.random(0, 49)
	end
	local body
	if api == "envoy" then
		body = string.format(
			'{"domain":"platform","descriptors":[{"entries":[{"key":"app_id","value":"%s"},{"key":"ip","value":"%s"}]},' ..
			'{"entries":[{"key":"app_id","value":"%s"},{"key":"user_id","value":"%s"},{"key":"interface_id","value":"%s"}]}]}',
			app, addr, app, user, iface)
	else
		body = string.format('{"app_id":"%s","ip":"%s","user_id":"%s","interface_id":"%s"}', app, addr, user, iface)
	end
	return wrk.format(nil, nil, nil, body)
end

local requests = {}
local nextRequest = 0

function init(args)
	math.randomseed(os.time() * 1000 + (id or 0) * 7919)
	wrk.method = "POST"
	wrk.headers["Content-Type"] = "application/json"
	if api == "envoy" then
		wrk.path = "/json"
	else
		wrk.path = "/v1/check"
	end
	local t0 = os.clock()
	for i = 1, count do
		requests[i] = draw()
	end
	if os.getenv("PEERS_LUA_VERBOSE") == "1" then
		io.stderr:write(string.format("check.lua: thread %d made %d requests in %.3f s\n", id or 0, count, os.clock() - t0))
	end
end

function request()
	nextRequest = nextRequest % count + 1
	return requests[nextRequest]
end
