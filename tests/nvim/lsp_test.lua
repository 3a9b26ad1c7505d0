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

-- The folder is trusted the way a user would, from their own init.lua: trusted_folders.
require("vmem_lsp").setup({ cmd = { python, "-m", "vmem_lsp", "serve" }, settings = { targets = { "v6e" } },
                            trusted_folders = { vim.fn.fnamemodify(file, ":p:h") } })
vim.cmd("edit " .. file)
local bufnr = vim.api.nvim_get_current_buf()

if not vim.wait(240000, function() return #vim.diagnostic.get(bufnr) >= 3 end, 200) then
  return finish("no VMEM diagnostics within 240 s")
end
seen.diagnostics = lines_of(vim.diagnostic.get(bufnr))
seen.steps[#seen.steps + 1] = "diagnostics"

-- Code actions on line 18 (the input BlockSpec): fixes are searched right after the verdict.
local actions
local ok = vim.wait(120000, function()
  local params = vim.lsp.util.make_range_params()
  params.range = { start = { line = 17, character = 31 }, ["end"] = { line = 17, character = 37 } }
  params.context = { diagnostics = vim.lsp.diagnostic.get_line_diagnostics(bufnr, 17) }
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
