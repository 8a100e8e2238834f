T('socket(AF_NETLINK, NETLINK_KOBJECT_UEVENT)', lambda: SC(41, 16, 2, 15))
T('socket(AF_NETLINK, NETLINK_ROUTE) (allowed)', lambda: SC(41, 16, 2, 0))
