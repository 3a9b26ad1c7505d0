-- A folder named only in the "vmemLsp" settings is not trusted: settings are what a project's own
-- files can answer (workspace/configuration, a project's .nvim.lua), so the client leaves
-- trustedFolders out of the initialization options it makes from them, and the server leaves it
-- out of workspace/configuration. Waits for the server's first verdict on the file (VMEM013: not
-- compiled, or VMEM001 had it compiled) and the trust notice, and writes them to $VMEM_RESULT.
local python, file, out = os.getenv("VMEM_PYTHON"), os.getenv("VMEM_FILE"), os.getenv("VMEM_RESULT")
local folder = vim.fn.fnamemodify(file, ":p:h")
local seen = { failure = vim.NIL, diagnostics = {}, notices = {} }
-- The server's trust notice is answered as dismissed (Neovim's own handler would wait on a prompt).
vim.lsp.handlers["window/showMessageRequest"] = function(_, params)
  table.insert(seen.notices, params.message)
  return vim.NIL
end
local settings = { targets = { "v6e" }, trustedFolders = { folder } }
if os.getenv("VMEM_CLIENT") == "enable" then
  vim.lsp.config("vmem_lsp", { cmd = { python, "-m", "vmem_lsp", "serve" }, settings = { vmemLsp = settings } })
  vim.lsp.enable("vmem_lsp")
else
  require("vmem_lsp").setup({ cmd = { python, "-m", "vmem_lsp", "serve" }, settings = settings })
end
vim.cmd("edit " .. file)
local bufnr = vim.api.nvim_get_current_buf()
local function verdict()
  for _, d in ipairs(vim.diagnostic.get(bufnr)) do
    if d.code == "VMEM013" or d.code == "VMEM001" then
      return true
    end
  end
  return false
end
if not vim.wait(120000, verdict, 200) then
  seen.failure = "neither VMEM013 nor VMEM001 within 120 s"
else
  vim.wait(30000, function() return #seen.notices > 0 end, 100)  -- the notice follows the note
end
for _, d in ipairs(vim.diagnostic.get(bufnr)) do
  table.insert(seen.diagnostics, { line = d.lnum + 1, code = d.code, message = d.message })
end
local f = io.open(out, "w")
f:write(vim.fn.json_encode(seen))
f:close()
vim.cmd("qa!")
