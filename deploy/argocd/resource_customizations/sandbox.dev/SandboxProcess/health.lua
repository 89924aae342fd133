-- Argo CD health for sandbox.dev/SandboxProcess. Follows the object's kstatus conditions
-- (Reconciling, Stalled) like kstatus does, and names the phase, exit code or error in the message.
--   no status yet / status of an older generation  -> Progressing
--   Pending, Running not yet Ready                  -> Progressing
--   Running, a restart waiting out its back-off
--     (restartPolicy; reason BackOff)               -> Progressing
--   Running and Ready                               -> Healthy
--   Exited with code 0, or stopped on request       -> Healthy
--   Ended before it was ever ready (readiness
--     declared, ExitedBeforeReady), whatever code  -> Degraded
--   Exited non-zero, killed, timed out, OOMKilled   -> Degraded
--   Error (ContainerNotFound, StaleProcessHandle,
--     AgentUnavailable, ProcessLost, ...)           -> Degraded
--   Running with readiness timed out                -> Degraded (the process keeps running)
-- Written for Argo CD's Lua 5.1 interpreter (gopher-lua).
local hs = {}

local function condition(t)
  if obj.status == nil or obj.status.conditions == nil then
    return nil
  end
  for _, c in ipairs(obj.status.conditions) do
    if c.type == t then
      return c
    end
  end
  return nil
end

local function said(c, fallback)
  if c ~= nil and c.message ~= nil and c.message ~= "" then
    if c.reason ~= nil and c.reason ~= "" then
      return c.reason .. ": " .. c.message
    end
    return c.message
  end
  return fallback
end

if obj.status == nil or obj.status.phase == nil then
  hs.status = "Progressing"
  hs.message = "Waiting for the operator to pick up the SandboxProcess"
  return hs
end

local st = obj.status
local generation = obj.metadata.generation
if generation ~= nil and st.observedGeneration ~= nil and st.observedGeneration < generation then
  hs.status = "Progressing"
  hs.message = "Waiting for the operator to observe generation " .. generation
  return hs
end

local phase = st.phase
local ready = condition("Ready")
local succeeded = condition("Succeeded")
local reconciling = condition("Reconciling")
local stalled = condition("Stalled")

if phase == "Error" then
  hs.status = "Degraded"
  if st.error ~= nil then
    hs.message = st.error.code .. ": " .. (st.error.message or "")
  else
    hs.message = said(stalled, "The process could not be run")
  end
  return hs
end

local function with_output(message)
  if st.output ~= nil and st.output.tail ~= nil and st.output.tail ~= "" then
    local tail = st.output.tail
    if string.len(tail) > 200 then
      tail = "..." .. string.sub(tail, -200)
    end
    return message .. "; output: " .. tail
  end
  return message
end

if phase == "Exited" then
  local code = "?"
  if st.exit ~= nil and st.exit.code ~= nil then
    code = tostring(st.exit.code)
  end
  -- A process with readiness that ended before it was ever ready (a server that never listened),
  -- whatever its exit code. An operator from before ExitedBeforeReady wrote Ready=True Succeeded
  -- for it on code 0: no readyAt tells the same.
  local before_ready = ready ~= nil and ready.reason == "ExitedBeforeReady"
  local never_ready = obj.spec ~= nil and obj.spec.readiness ~= nil and st.readyAt == nil
  if before_ready or never_ready then
    hs.status = "Degraded"
    if before_ready then
      hs.message = with_output(said(ready, "ExitedBeforeReady"))
    else
      hs.message = with_output("ExitedBeforeReady: exit code " .. code .. " before it was ever ready")
    end
  elseif succeeded ~= nil and succeeded.status == "True" then
    hs.status = "Healthy"
    hs.message = "Exited with code 0"
  elseif ready ~= nil and ready.status == "True" then
    -- Stopped on request (spec.stop), whatever the code.
    hs.status = "Healthy"
    hs.message = "Stopped on request (exit code " .. code .. ")"
  else
    hs.status = "Degraded"
    local why = st.endReason or "Exited"
    hs.message = with_output(why .. " with exit code " .. code)
  end
  return hs
end

if stalled ~= nil and stalled.status == "True" then
  hs.status = "Degraded"
  hs.message = said(stalled, "Stalled")
  return hs
end

if phase == "Running" and ready ~= nil and ready.status == "True" then
  hs.status = "Healthy"
  hs.message = said(ready, "Running and ready")
  return hs
end

hs.status = "Progressing"
if reconciling ~= nil and reconciling.status == "True" then
  hs.message = said(reconciling, phase)
else
  hs.message = said(ready, phase)
end
return hs
