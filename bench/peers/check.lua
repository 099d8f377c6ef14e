-- bench/peers/check.lua — wrk's requests for make bench-peers: one check
-- with the platform's two limits per request, as quotad's POST /v1/check
-- (PEERS_API=quota) or envoy ratelimit's POST /json (PEERS_API=envoy).
-- Ordinary traffic draws app (1,000), user and IP (100,000 each) and
-- interface (50) uniformly; PEERS_FLOOD=0.9 sends 90 % of the calls from
-- 10 fixed identities (past their limits after their first 1,000 calls),
-- each its own app and IP; PEERS_FLOOD_SHARED=1 makes them 10 users of one
-- app behind one IP, past both limits (1,000 a user, 10,000 the app's IP).
local api = os.getenv("PEERS_API") or "quota"
local flood = tonumber(os.getenv("PEERS_FLOOD") or "0")
local shared = os.getenv("PEERS_FLOOD_SHARED") == "1"
local counter = 0

function setup(thread)
	counter = counter + 1
	thread:set("id", counter)
end

function init(args)
	math.randomseed(os.time() * 1000 + (id or 0) * 7919)
	wrk.method = "POST"
	wrk.headers["Content-Type"] = "application/json"
	if api == "envoy" then
		wrk.path = "/json"
	else
		wrk.path = "/v1/check"
	end
end

local function ip(n)
	return string.format("10.%d.%d.%d", math.floor(n / 65536) % 256, math.floor(n / 256) % 256, n % 256)
end

function request()
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
