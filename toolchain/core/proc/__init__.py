"""Running commands: the runner (`runner.run`), background commands (`background.start`), stop signals
(`signals`), the children a stop ends (`children`), their cgroups (`cgroups`), and who owns what the tool
leaves behind (`owner`). Import each name from the module that owns it."""
