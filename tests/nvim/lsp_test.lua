-- Headless Neovim drives vmem-lsp through its built-in client: open the file,
-- wait for the VMEM diagnostics, apply the quick fix, save, wait for them to clear.
-- Writes what it saw as JSON to $VMEM_RESULT; the pytest side asserts.
local python, file, out = os.getenv("VMEM_PYTHON"), os.getenv("VMEM_FILE"), os.getenv("VMEM_RESULT")
local seen = { steps = {} }

local function finish(failure)
  seen.failure = failure or vim.NIL
  local f = io.open(out, "w")
  f:write(vim.fn.json_encode(seen))
  f:close()
  vim.cmd("qa!")
end

local function lines_of(diagnostics)
  local found = {}
  for _, d in ipairs(diagnostics) do
    table.insert(found, { line = d.lnum + 1, col = d.col, code = d.code or (d.user_data and d.user_data.lsp and d.user_data.lsp.code), message = d.message })
  end
  return found
end

-- The client is set up as a user would in their own init.lua, the folder trusted there too.
-- VMEM_CLIENT=enable: Neovim 0.11's way, lsp/vmem_lsp.lua found on the runtime path, the user's
-- options by vim.lsp.config. Else require("vmem_lsp").setup().
if os.getenv("VMEM_CLIENT") == "enable" then
  vim.lsp.config("vmem_lsp", { cmd = { python, "-m", "vmem_lsp", "serve" },
                               settings = { vmemLsp = { targets = { "v6e" } } },
                               init_options = { trustedFolders = { vim.fn.fnamemodify(file, ":p:h") } } })
  vim.lsp.enable("vmem_lsp")
else
  require("vmem_lsp").setup({ cmd = { python, "-m", "vmem_lsp", "serve" }, settings = { targets = { "v6e" } },
                              trusted_folders = { vim.fn.fnamemodify(file, ":p:h") } })
end
vim.cmd("edit " .. file)
local bufnr = vim.api.nvim_get_current_buf()

-- A config that does not start the server for this buffer (its filetypes, its cmd) fails here, not
-- after the wait for diagnostics. get_clients is 0.10's; buf_get_clients, 0.7's, is deprecated there.
local function attached()
  local clients = vim.lsp.get_clients and vim.lsp.get_clients({ bufnr = bufnr }) or vim.lsp.buf_get_clients(bufnr)
  return next(clients) ~= nil
end
if not vim.wait(30000, attached, 100) then
  return finish("no language server attached to " .. file .. " within 30 s (filetype " .. vim.bo[bufnr].filetype .. ")")
end

if not vim.wait(240000, function() return #vim.diagnostic.get(bufnr) >= 3 end, 200) then
  return finish("no VMEM diagnostics within 240 s")
end
seen.diagnostics = lines_of(vim.diagnostic.get(bufnr))
seen.steps[#seen.steps + 1] = "diagnostics"

-- Code actions on line 18 (the input BlockSpec): fixes are searched right after the verdict.
local actions
local ok = vim.wait(120000, function()
  local params = vim.lsp.util.make_range_params(0, "utf-16")
  params.range = { start = { line = 17, character = 31 }, ["end"] = { line = 17, character = 37 } }
  -- vim.lsp.diagnostic.from is 0.11's (get_line_diagnostics, 0.7's, is deprecated there)
  params.context = { diagnostics = vim.lsp.diagnostic.from and vim.lsp.diagnostic.from(vim.diagnostic.get(bufnr, { lnum = 17 }))
                                   or vim.lsp.diagnostic.get_line_diagnostics(bufnr, 17) }
  local responses = vim.lsp.buf_request_sync(bufnr, "textDocument/codeAction", params, 5000) or {}
  for _, response in pairs(responses) do
    if response.result and #response.result > 0 then
      actions = response.result
      return true
    end
  end
  return false
end, 500)
if not ok then
  return finish("no code action offered")
end
seen.actions = {}
for _, action in ipairs(actions) do
  table.insert(seen.actions, action.title)
end
-- As vim.lsp.buf.code_action() does: an action without an edit (an estimate the compiler is
-- still checking; Neovim declares resolveSupport for "edit") is resolved first.
local chosen = actions[1]
if not chosen.edit then
  local resolved = vim.lsp.buf_request_sync(bufnr, "codeAction/resolve", chosen, 180000) or {}
  for _, response in pairs(resolved) do
    if response.result and response.result.edit then
      chosen = response.result
    end
  end
  seen.resolved = chosen.title
end
if not chosen.edit then
  return finish("the chosen code action has no edit, even resolved")
end
vim.lsp.util.apply_workspace_edit(chosen.edit, "utf-16")
vim.cmd("write")
seen.steps[#seen.steps + 1] = "fixed"
if not vim.wait(240000, function() return #vim.diagnostic.get(bufnr) == 0 end, 200) then
  seen.after = lines_of(vim.diagnostic.get(bufnr))
  return finish("diagnostics did not clear after the fix")
end
seen.buffer = table.concat(vim.api.nvim_buf_get_lines(bufnr, 0, -1, false), "\n")
finish(nil)
