// TODO(helper)
