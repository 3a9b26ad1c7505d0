-- The client configuration of vmem-lsp that both ways of starting it share: lsp/vmem_lsp.lua
-- (Neovim 0.11+: vim.lsp.config / vim.lsp.enable) returns it as is, and require("vmem_lsp").setup()
-- (0.7 to 0.10, and 0.11 for those who keep it) starts from it.
local M = {}

-- Folders as the server compares them: `~` and relative paths made absolute.
local function absolute(folders)
  return vim.tbl_map(function(f) return vim.fn.fnamemodify(vim.fn.expand(f), ":p") end, folders or {})
end

-- Neovim 0.10 and 0.11 pull diagnostics (textDocument/diagnostic) but cannot be asked to pull again
-- (no workspace.diagnostics.refreshSupport; 0.7 to 0.9 do not pull). The compiler's verdict comes
-- seconds after the pull that opening a file makes, so it would show only after the next edit:
-- such a client takes the pushed diagnostics (textDocument/publishDiagnostics) instead.
local function pulls_unprompted(capabilities)
  local text, workspace = (capabilities or {}).textDocument or {}, (capabilities or {}).workspace or {}
  return text.diagnostic ~= nil and not (workspace.diagnostics or {}).refreshSupport
end

-- The initialization options, made from the config as it stands when the client starts, so that
-- vim.lsp.config("vmem_lsp", {...}) overrides count: the "vmemLsp" settings (the server has them
-- before the first file opens, not only once it asks by workspace/configuration) and
-- init_options, with trustedFolders made absolute. Trusted folders come from init_options only: the
-- server never takes them from workspace/configuration, which a project's own files can answer,
-- and settings.vmemLsp.trustedFolders is left out here the same way.
function M.before_init(params, config)
  local options = vim.tbl_extend("force", {}, (config.settings or {}).vmemLsp or {}, config.init_options or {})
  options.trustedFolders = (config.init_options or {}).trustedFolders  -- never from settings, as the server
  if options.trustedFolders then
    options.trustedFolders = absolute(options.trustedFolders)
  end
  params.initializationOptions = options
  if pulls_unprompted(params.capabilities) then
    params.capabilities = vim.deepcopy(params.capabilities)
    params.capabilities.textDocument.diagnostic = nil
  end
end

-- The other half: a client the server pushes to does not pull as well (that would show each
-- diagnostic twice, pushed and pulled).
function M.on_init(client)
  if pulls_unprompted(client.capabilities) then
    client.server_capabilities.diagnosticProvider = nil
  end
end

-- A new table each call: vim.lsp.config and setup() merge the user's options into it.
-- workspace/configuration is answered by Neovim's own handler from `settings`: the "vmemLsp"
-- section is settings.vmemLsp.
function M.config()
  return {
    cmd = { "vmem-lsp", "serve" },
    filetypes = { "python" },
    root_markers = { "pyproject.toml", "setup.py", ".git" },
    settings = { vmemLsp = {} },
    init_options = {},
    before_init = M.before_init,
    on_init = M.on_init,
  }
end

return M
